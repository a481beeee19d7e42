"""The domain: jobs, specs, frameworks, the replica environment and the cell header. Imports
nothing else of distrun."""
