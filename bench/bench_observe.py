"""What observing costs (issue 39), as same-run ratios of the stdio echo agent's CPU per
prompt and prompts/s:

* ``before``: the agent rendered by the last commit without the `observe` room (``--rev``,
  default: the parent of the commit that added it): no hook at all;
* ``off``: this checkout's agent, the `otel` extra installed (it is in the dev venv) but no
  ``OTEL_*`` variable set: the default path (target: at most 2% slower than ``before``);
* ``on``: the same agent fully on: traces sampled at 100% (``OTEL_TRACES_SAMPLER=
  always_on``) and metrics, both exported over OTLP/HTTP every 500 ms / 1 s to a sink on
  127.0.0.1 started here (target: at most 15% slower than ``off``).

Rendered and driven like bench_before_after.py (../shared/tools/acpbench.py, the CPU
wrapper, CPU per prompt = the difference between runs of N and 2N prompts over N), the
three agents alternating within each round; the difference of the medians, and of the
minimums (the `min` columns: on a shared machine other jobs only ever add CPU, and the
median of a difference of two noisy runs moved by +-30% from run to run).

    .venv/bin/python bench/bench_observe.py [--rounds 3] [--quick] [--rev REV] [--hooks-only]
        [--model-only] [--echo-only] [--model-rev REV] [--instructions]
        [--instruction-prompts N] [--by-thread] [--one-thread]

``--one-thread``: what an echo-shaped prompt's three spans cost with no thread's timing in
the count: the runtime's hooks as the agent calls them (a request, its turn, the turn's
store call; 8 sessions in turn) and the pass they run every 128 spans (folded, encoded;
not posted) in one thread, off and on (valgrind; runs of N and 6N prompts).

``--by-thread``: the instructions of an echo prompt off and on, the event loop's thread
and the other threads' (the export thread, the metrics thread, the store's executor)
apart (callgrind's `--separate-threads=yes`; one run of N and one of 2N prompts each).

``--instructions``: instead, the instructions each agent executes per echo prompt, counted
by valgrind (Debian's package), which a loaded machine does not move: the same ratios
without the +-30% noise of CPU time on a shared machine (but blind to what instructions
cost: cache misses, the GIL's handovers).

On a loaded machine the CPU per prompt of two runs of the same agent differs by more than
2%, so the off path is also measured directly: how many hook calls an echo prompt passes
(counted in process) times one call's CPU (timeit, best of 5).

Then what an operator runs: a model turn (bench_model.py's agent: `run_model` serving a
pydantic-ai FunctionModel that makes one tool call and answers text, `tools 1`, one
session, turns one after another) ``off`` and ``on`` as above, interleaved, the agent
process's CPU per turn after the session opened (``--model-rev REV``: also ``on`` as
revision REV renders that agent, a same-run before/after of a telemetry change); and the
SDK's own floor, measured alone:
one span (6 attributes) started and ended, one span OTLP-encoded, one histogram record.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import bench_before_after as ba
import bench_model as bm
import bench_stdio as b

REPO = Path(__file__).resolve().parents[1]
LOADS = [  # the echo turn (nothing but the runtime's own work: the worst case), then a
    # turn with more to do (50 blocks streamed back)
    ("--prompts 2000", ["--prompts", "2000"]),
    ("--sessions 8", ["--prompts", "2000", "--sessions", "8"]),
    ("--blocks 50", ["--prompts", "1000", "--blocks", "50"]),
]


class Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that keeps nothing: 200 to every export, on a connection kept
    open as a collector's is (HTTP/1.1)."""

    protocol_version = "HTTP/1.1"
    received = 0

    def log_message(self, *args: object) -> None:
        return

    def do_POST(self) -> None:
        type(self).received += len(self.rfile.read(int(self.headers["Content-Length"] or 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


HOOKS = """
import asyncio, json, sys, time, timeit
pkg = sys.argv[1]
handlers = __import__(pkg + ".handlers", fromlist=["Agent"])
rt = pkg + "._generated.runtime."
observe = __import__(rt + "observe", fromlist=["turn"])
serve = __import__(rt + "serve", fromlist=["agent_connection"])
store = __import__(rt + "sessions.store", fromlist=["MemorySessionStore"])
assert not observe.on()
calls = [0]
HOOKS = ("request", "call", "turn", "tool", "store", "queued")
hooks = {name: getattr(observe, name) for name in HOOKS}

def counting(hook):
    def counted(*args):
        calls[0] += 1
        return hook(*args)
    return counted

async def prompts(n):
    got, done = {}, asyncio.Event()

    async def sink(batch):
        for frame, _ in batch:
            msg = json.loads(frame)
            if "id" in msg and "method" not in msg:
                got[msg["id"]] = msg
                done.set()

    conn = serve.agent_connection(handlers.Agent(), sink, store=store.MemorySessionStore())

    async def call(rid, method, params):
        conn.feed(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}))
        while rid not in got:
            done.clear()
            await done.wait()
        return got[rid]["result"]

    await call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    sid = (await call(2, "session/new", {"cwd": "/tmp", "mcpServers": []}))["sessionId"]
    for name, hook in hooks.items():
        setattr(observe, name, counting(hook))
    for i in range(n):
        await call(10 + i, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]})
    for name, hook in hooks.items():
        setattr(observe, name, hook)
    await conn.close()

asyncio.run(prompts(1000))

def hook():
    with observe.turn("s", None) as span:
        span.set_stop_reason("end_turn")

n = 200000
per = min(timeit.repeat(hook, number=n, repeat=5)) / n
print(calls[0] / 1000, per)
"""


# The hooks of N echo-shaped prompts (a request, its turn, the turn's store call; 8
# sessions in turn) in one thread, with the pass they run every 128 spans (`Batch.full`:
# folded, encoded), the export thread stopped and its batches not posted: what an echo
# prompt's spans cost with no thread's timing in it (`--one-thread`)
ONE_THREAD = """
import sys
pkg, n = sys.argv[1], int(sys.argv[2])
rt = pkg + "._generated.runtime."
observe = __import__(rt + "observe", fromlist=["turn"])
telemetry = observe._state.on
batch = telemetry.batch if telemetry is not None else None
if batch is not None:  # its thread stopped: the outbox emptied here (not posted)
    batch.stopping = True
    batch.wake.set()
    batch.thread.join()
FACTS = (("acp.transport", "stdio"), ("acp.revision", 1), ("acp.replica", "bench:1"))

class Connection:
    def about(self):
        return FACTS

conn, calls, store = Connection(), ("save_turn",), None  # (the lambda is never called)
sessions = ["sess_%032x" % i for i in range(8)]
prompt = [{"type": "text", "text": "hi"}]
for i in range(n):
    sid = sessions[i % 8]
    with observe.request("session/prompt", {"sessionId": sid, "prompt": prompt}, conn):
        with observe.turn(sid, prompt) as span:
            with observe.store(lambda: store.save_turn(), calls):
                pass
            span.set_stop_reason("end_turn")
    if batch is not None and len(batch.outbox) >= 512:
        batch.outbox.clear()
"""


FLOOR = """
import time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.metrics import MeterProvider, AlwaysOffExemplarFilter
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.trace import SpanKind

class Keep(SpanExporter):
    def __init__(self): self.spans = []
    def export(self, spans): self.spans.extend(spans); return SpanExportResult.SUCCESS
keep = Keep()
tp = TracerProvider(); tp.add_span_processor(SimpleSpanProcessor(keep))
tracer = tp.get_tracer("floor")
attrs = {"rpc.system": "jsonrpc", "rpc.method": "session/prompt", "acp.transport": "stdio", "acp.revision": 1, "acp.replica": "host:1", "acp.session_id": "sess_" + "0" * 32}
def best(fn, n, rounds=5):
    out = []
    for _ in range(rounds):
        t = time.process_time()
        for _ in range(n): fn()
        out.append((time.process_time() - t) / n)
    return min(out)
def span():
    tracer.start_span("session/prompt", None, SpanKind.SERVER, attrs).end()
n = 20000
per_span = best(span, n)
spans = keep.spans[-512:]
per_encode = best(lambda: encode_spans(spans).SerializeToString(), 20) / len(spans)
mp = MeterProvider(metric_readers=[InMemoryMetricReader()], exemplar_filter=AlwaysOffExemplarFilter())
h = mp.get_meter("floor").create_histogram("h", "s", "", explicit_bucket_boundaries_advisory=[0.001, 0.01, 0.1, 1.0])
labels = {"method": "session/prompt", "outcome": "ok", "code": "0"}
per_record = best(lambda: h.record(0.001, labels), n)
print(per_span, per_encode, per_record)
"""


def sdk_floor() -> tuple[float, float, float]:
    """The SDK's own CPU, alone: a span started and ended, a span OTLP-encoded, a record."""
    r = subprocess.run([b.PY, "-c", FLOOR], capture_output=True, text=True, check=True)
    span, encode, record = (float(x) for x in r.stdout.split())
    return span, encode, record


MODEL_TURNS = 100


def model_agent(tree: Path, dest: Path, package: str) -> None:
    """bench_model.py's agent as the generator in `tree` (a checkout of another revision:
    bench_before_after.checkout) renders it, as `package` under `dest`."""
    inputs = dest / f"{package}.json"
    schema = json.loads((REPO.parent / "shared" / "acp" / "v1" / "schema.json").read_text())
    inputs.write_text(json.dumps({"schema": schema, "meta": None, "manifest": bm.MANIFEST}))
    pkg = dest / package
    subprocess.run([b.PY, "-c", ba.RENDER, str(tree), str(pkg), str(inputs)], check=True, cwd=dest)
    (pkg / "__init__.py").write_text("")
    (pkg / "handlers.py").write_text(bm.HANDLERS.format(agents=str(bm.AGENTS)))
    (pkg / "__main__.py").write_text(
        "from ._generated import run_agent\nfrom .handlers import Agent\n\nrun_agent(Agent, None)\n"
    )


def model_rows(
    plain: dict[str, str], on: dict[str, str], opts: argparse.Namespace, tmp: Path
) -> None:
    """A model turn with one tool call, off and on, interleaved: CPU per turn, latency;
    with `--model-rev`, also on as that revision renders the agent."""
    turns = 20 if opts.quick else MODEL_TURNS
    root = bm.build(tmp)
    agents = {"off": ("model_bench", plain), "on": ("model_bench", on)}
    if opts.model_rev:
        model_agent(ba.checkout(opts.model_rev, tmp / "model-rev-src"), tmp, "model_rev")
        agents["on-rev"] = ("model_rev", on)  # fully on as --model-rev renders it
    cpu: dict[str, list[float]] = {k: [] for k in agents}
    lat: dict[str, list[float]] = {k: [] for k in agents}
    for r in range(opts.rounds):
        for name in list(agents) if r % 2 == 0 else list(agents)[::-1]:
            pkg, base = agents[name]
            env = {
                **base,
                "PYTHONPATH": str(root),
                "ACP_SESSION_DB": str(tmp / f"{pkg}-{r}-{len(cpu[name])}.db"),
            }
            got = bm.drive([b.PY, "-m", pkg], env, "tools 1", turns)
            cpu[name].append(got["cpu"] / turns)
            lat[name].append(got["latency"])
    per = {k: statistics.median(v) for k, v in cpu.items()}
    for name in agents:
        print(
            f"{'model tools 1':<16}{name:<8}{turns:>11}{per[name] * 1000:>15.3f}"
            f"{'':>15}{per[name] / per['off']:>11.3f}x"
            f"   latency {statistics.median(lat[name]) * 1000:.1f} ms"
        )
    if opts.model_rev:
        print(f"on-rev: fully on, the agent as {opts.model_rev} renders it")


INSTRUCTION_LOADS = [
    ("--prompts 400", ["--prompts", "400"]),
    ("--sessions 8", ["--prompts", "400", "--sessions", "8"]),
]


# what a run under valgrind is given: the hash seed fixed, and the exports' timers past its
# end (a run is ~50x slower: only full batches are posted, as at full speed)
SLOW = {
    "PYTHONHASHSEED": "0",
    "OTEL_BSP_SCHEDULE_DELAY": "3600000",
    "OTEL_METRIC_EXPORT_INTERVAL": "3600000",
}


def instruction_loads(opts: argparse.Namespace) -> Iterator[tuple[str, list[str], list[str]]]:
    """The loads `--instructions` and `--by-thread` count (`--load` picks): each label,
    its run of N prompts and of 2N (`--instruction-prompts` N)."""
    n = opts.instruction_prompts
    for label, args in INSTRUCTION_LOADS:
        if opts.load and label not in opts.load:
            continue
        at = args.index("--prompts") + 1
        yield (
            label,
            [*args[:at], str(n), *args[at + 1 :]],
            [*args[:at], str(2 * n), *args[at + 1 :]],
        )


def summary(out: Path) -> int | None:
    """The instructions a valgrind output file counts (its `summary:` line; None: none),
    the file removed."""
    found = [line for line in out.read_text().splitlines() if line.startswith("summary:")]
    out.unlink()
    return int(found[0].split()[1]) if found else None


def summaries(
    pkg: str, env: dict[str, str], load: list[str], tmp: Path, tool: list[str]
) -> list[int]:
    """The instructions the agent process executed in one acpbench run under valgrind
    (Debian's `valgrind`; `tool`: its tool and options), one a thread when the tool writes a
    file a thread (callgrind `--separate-threads=yes`: the main thread's first)."""
    out = tmp / f"valgrind-{pkg}-{'-'.join(load)}"
    db = tmp / f"{pkg}-instructions.db"
    for stale in [*db.parent.glob(f"{db.name}*"), *out.parent.glob(f"{out.name}*")]:
        stale.unlink()
    name = tool[0].removeprefix("--tool=")
    cmd = ["valgrind", *tool, f"--{name}-out-file={out}"]
    b._acpbench(
        ["--timeout", "600", *load],
        [*cmd, b.PY, "-m", pkg],
        {**env, **SLOW, "ACP_SESSION_DB": str(db)},
    )
    parts = sorted(out.parent.glob(f"{out.name}*"))  # (callgrind leaves `out` empty)
    return [n for n in map(summary, parts) if n is not None]


def instructions(pkg: str, env: dict[str, str], load: list[str], tmp: Path) -> int:
    """The instructions of one run (cachegrind, no cache simulation)."""
    return summaries(pkg, env, load, tmp, ["--tool=cachegrind", "--cache-sim=no"])[0]


def thread_instructions(
    pkg: str, env: dict[str, str], load: list[str], tmp: Path
) -> tuple[int, int]:
    """The instructions of one run by thread (callgrind `--separate-threads=yes`): the main
    thread's (the event loop's) and the others' (the export and metrics threads, the
    executor's that the store uses) summed."""
    main, *others = summaries(pkg, env, load, tmp, ["--tool=callgrind", "--separate-threads=yes"])
    return main, sum(others)


def thread_rows(
    agents: dict[str, tuple[str, dict[str, str]]], opts: argparse.Namespace, tmp: Path
) -> None:
    """Per echo prompt, by thread: the event loop's instructions and the other threads'
    (runs of 2N less N prompts, over N; `--instruction-prompts` N, one run each)."""
    print(f"{'load':<16}{'agent':<8}{'event loop':>12}{'other threads':>15}{'whole':>10}")
    n = opts.instruction_prompts
    for label, single, double in instruction_loads(opts):
        for name in ("off", "on"):
            pkg, env = agents[name]
            one = thread_instructions(pkg, env, single, tmp)
            two = thread_instructions(pkg, env, double, tmp)
            loop, rest = ((two[i] - one[i]) / n for i in (0, 1))
            print(f"{label:<16}{name:<8}{loop:>12,.0f}{rest:>15,.0f}{loop + rest:>10,.0f}")


def instruction_rows(
    agents: dict[str, tuple[str, dict[str, str]]], opts: argparse.Namespace, tmp: Path
) -> None:
    """Per echo prompt: the instructions of a run of 2N prompts less those of N, over N;
    machine load does not move them (only the hash seed, fixed here, and thread timing
    do).  Under valgrind a run is ~50x slower, so the exports' timers are set past its
    end: only full batches are posted, as at full speed.  With 8 sessions the same code's
    count swings by tens of thousands a prompt from round to round (the threads' timing
    against the driver's pace: the same agent has read 400-420k off): the agents take
    turns within each round, and each row shows its rounds' lowest and highest beside
    their median."""
    print(
        f"{'load':<16}{'agent':<8}{'instr/prompt':>14}{'vs before':>11}{'vs off':>9}"
        f"{'rounds: low - high':>24}"
    )
    n = opts.instruction_prompts
    for label, single, double in instruction_loads(opts):
        runs: dict[str, list[float]] = {name: [] for name in agents}
        for r in range(opts.rounds):
            for name in list(agents) if r % 2 == 0 else list(agents)[::-1]:
                pkg, env = agents[name]
                one = instructions(pkg, env, single, tmp)
                two = instructions(pkg, env, double, tmp)
                runs[name].append((two - one) / n)
        per = {name: statistics.median(got) for name, got in runs.items()}
        for name in agents:
            print(
                f"{label:<16}{name:<8}{per[name]:>14,.0f}{per[name] / per['before']:>10.3f}x"
                f"{per[name] / per['off']:>8.3f}x"
                f"{min(runs[name]):>13,.0f} - {max(runs[name]):,.0f}"
            )


def one_thread_rows(
    agents: dict[str, tuple[str, dict[str, str]]], opts: argparse.Namespace, tmp: Path
) -> None:
    """Per echo-shaped prompt, off and on: the instructions of `ONE_THREAD` over 6N
    prompts less over N, over 5N (`--instruction-prompts` N): the same count at every run."""
    n = opts.instruction_prompts
    per = {}
    for name in ("off", "on"):
        pkg, env = agents[name]
        counts = []
        for prompts in (n, 6 * n):
            out = tmp / f"one-thread-{name}-{prompts}"
            subprocess.run(
                [
                    *("valgrind", "--tool=cachegrind", "--cache-sim=no"),
                    f"--cachegrind-out-file={out}",
                    *(b.PY, "-c", ONE_THREAD, pkg, str(prompts)),
                ],
                env={**env, **SLOW},
                capture_output=True,
                check=True,
            )
            count = summary(out)
            assert count is not None, f"valgrind counted nothing: {out}"
            counts.append(count)
        per[name] = (counts[1] - counts[0]) / (5 * n)
    print(
        f"one thread, an echo-shaped prompt: off {per['off']:,.0f}, on {per['on']:,.0f}"
        f" instructions: +{per['on'] - per['off']:,.0f} (its three spans, folded and encoded)"
    )


def hooks_off(env: dict[str, str]) -> tuple[float, float]:
    """The hooks an echo prompt passes when telemetry is off, and one hook's CPU cost."""
    r = subprocess.run(
        [b.PY, "-c", HOOKS, "echo_bench"], capture_output=True, text=True, env=env, check=True
    )
    calls, per = r.stdout.split()
    return float(calls), float(per)


def before_observe() -> str:
    """The parent of the commit that added templates/runtime/observe/."""
    added = subprocess.run(
        [
            "git",
            "-C",
            str(REPO),
            "log",
            "--diff-filter=A",
            "--format=%h",
            "--",
            "templates/runtime/observe/__init__.py",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not added:
        raise SystemExit("no commit adds templates/runtime/observe/: pass --rev")
    return added[-1] + "^"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a tenth of the prompts")
    ap.add_argument("--rev", help="the revision without observe (default: found in git)")
    ap.add_argument("--hooks-only", action="store_true", help="only the hooks' cost when off")
    ap.add_argument("--model-only", action="store_true", help="only the model turn's rows")
    ap.add_argument("--echo-only", action="store_true", help="only the echo agent's rows")
    ap.add_argument("--load", action="append", help="only these echo loads (e.g. '--sessions 8')")
    ap.add_argument(
        "--model-rev", help="also the model turn fully on as this revision renders the agent"
    )
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="only the echo prompt's instructions (valgrind), before / off / on",
    )
    ap.add_argument(
        "--instruction-prompts",
        type=int,
        default=400,
        help="N of the runs of N and 2N prompts --instructions counts (more: less of a run's"
        " start-up in the difference)",
    )
    ap.add_argument(
        "--one-thread",
        action="store_true",
        help="only what an echo-shaped prompt's spans cost in one thread, their pass"
        " included (valgrind; no thread's timing in the count)",
    )
    ap.add_argument(
        "--by-thread",
        action="store_true",
        help="only the echo prompt's instructions off and on, the event loop's thread and the"
        " others' apart (callgrind)",
    )
    opts = ap.parse_args()
    rev = opts.rev or before_observe()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sink = f"http://127.0.0.1:{server.server_address[1]}"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        inputs = root / "inputs.json"
        inputs.write_text(
            json.dumps(
                {
                    "schema": json.loads(b.SCHEMA.read_text()),
                    "meta": json.loads(b.META.read_text()),
                    "manifest": b.echo_manifest(),
                }
            )
        )
        old = root / "baseline-src"
        old.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", rev, "generator", "templates", "schema"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        ba.render(old, root, "echo_base", inputs)
        ba.render(REPO, root, "echo_bench", inputs)
        plain = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        plain["PYTHONPATH"] = str(root)
        plain.pop("ACP_SESSION_STORE", None)  # the default store (SQLite)
        on = {
            **plain,
            "OTEL_SERVICE_NAME": "echo-bench",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": sink,
            "OTEL_TRACES_SAMPLER": "always_on",
            "OTEL_BSP_SCHEDULE_DELAY": "500",
            "OTEL_BSP_MAX_QUEUE_SIZE": "100000",  # every span exported, none dropped
            "OTEL_METRIC_EXPORT_INTERVAL": "1000",
        }
        agents = {
            "before": ("echo_base", plain),
            "off": ("echo_bench", plain),
            "on": ("echo_bench", on),
        }
        print(
            f"bench_observe: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit "
            f"{b.commit()} against {rev}, load average {b.loadavg()} before, "
            f"median of {opts.rounds} interleaved rounds"
        )
        if opts.one_thread:
            one_thread_rows(agents, opts, root)
            server.shutdown()
            return 0
        if opts.by_thread:
            thread_rows(agents, opts, root)
            server.shutdown()
            return 0
        if opts.instructions:
            instruction_rows(agents, opts, root)
            server.shutdown()
            return 0
        print(
            f"{'load':<16}{'agent':<8}{'prompts/s':>11}{'ms CPU/prompt':>15}"
            f"{'CPU vs before':>15}{'CPU vs off':>12}{'min: ms/prompt':>16}{'vs off':>8}"
        )
        loads = [(k, v) for k, v in LOADS if not opts.load or k in opts.load]
        for label, load_args in [] if opts.hooks_only or opts.model_only else loads:
            args = b.quick_args(load_args) if opts.quick else load_args
            at = args.index("--prompts") + 1
            n = int(args[at])
            double = [*args[:at], str(2 * n), *args[at + 1 :]]
            rate: dict[str, list[float]] = {k: [] for k in agents}
            cpu: dict[tuple[str, int], list[float]] = {(k, m): [] for k in agents for m in (1, 2)}
            for r in range(opts.rounds):
                order = list(agents) if r % 2 == 0 else list(agents)[::-1]
                for name in order:
                    pkg, env = agents[name]
                    for m, load in ((1, args), (2, double)):
                        got, used = ba.drive(load, pkg, env, root / f"{name}-{m}.db")
                        if m == 1:
                            rate[name].append(got)
                        cpu[(name, m)].append(used)
            per = {
                k: (statistics.median(cpu[(k, 2)]) - statistics.median(cpu[(k, 1)])) / n
                for k in agents
            }
            # the same from each run length's least CPU: a shared machine only ever adds
            least = {k: (min(cpu[(k, 2)]) - min(cpu[(k, 1)])) / n for k in agents}
            for name in agents:
                print(
                    f"{label:<16}{name:<8}{statistics.median(rate[name]):>11.1f}"
                    f"{per[name] * 1000:>15.3f}{per[name] / per['before']:>14.3f}x"
                    f"{per[name] / per['off']:>11.3f}x"
                    f"{least[name] * 1000:>16.3f}{least[name] / least['off']:>7.3f}x"
                )
        if not opts.hooks_only and not opts.echo_only:
            print(
                f"{'load':<16}{'agent':<8}{'turns':>11}{'ms CPU/turn':>15}{'':>15}{'CPU vs off':>12}"
            )
            model_rows(plain, on, opts, root)
        print(f"load average after {b.loadavg()}; the OTLP sink received {Sink.received} bytes")
        calls, each = hooks_off(plain)
        print(
            f"off: {calls:g} hook calls per echo prompt, {each * 1e9:.0f} ns each (best of 5): "
            f"{calls * each * 1e6:.2f} us per prompt"
        )
        span, encode, record = sdk_floor()
        print(
            f"the SDK alone (best of 5): a span started and ended {span * 1e6:.1f} us, "
            f"OTLP-encoded {encode * 1e6:.1f} us, a histogram record {record * 1e6:.1f} us"
        )
    server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
