"""The agent side: `AgentRuntime` (`agent`, the base of the generated `AgentBase`) composed
of one collaborator per concern around one `AgentContext` (`context`): dispatch, turns and
`Turn` (`turns`), what a handler shows (`authoring`), the client calls a turn makes
(`clientcalls`), config options, modes and slash commands (`config`, `commands`),
providers, interrupts and stdio auth methods.  Imports only `wire`."""
