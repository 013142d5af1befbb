"""agentgen: Agent Client Protocol schema + manifests -> typed models, dispatchers, projects."""

__version__ = "0.1.0"
