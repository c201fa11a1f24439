from runbook_runner.cli import main

raise SystemExit(main())
