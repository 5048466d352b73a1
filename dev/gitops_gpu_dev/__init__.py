"""gitops-gpu's development tools: the local testbed (control plane, GPU Operator, Gitea,
Prometheus, simulated GPU hosts), the demos and repo maintenance. Not shipped in the wheel or
the image; `make` installs it (dev/pyproject.toml) and it adds `gitops-gpu testbed` and
`gitops-gpu demo` to the CLI."""
