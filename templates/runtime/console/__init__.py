"""A generated client's console script (`main.run_client`: `-- CMD` or `--url`, each stdin
line a prompt; `console`: the loop, the start-up deadline, exit statuses).  Imports `wire`
and `client`; only client projects carry it."""
