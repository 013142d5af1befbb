"""agentgen: Agent Client Protocol schema + manifests -> typed models, dispatchers, projects."""

__version__ = "0.1.0"

# the project's repository (pyproject's [project.urls] Repository; README's install line and
# pre-commit snippet); releases are tagged v<version>
REPOSITORY = "https://github.com/agentgen/agentgen"
