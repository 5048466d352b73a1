from gitops_gpu.cli import main

raise SystemExit(main())
