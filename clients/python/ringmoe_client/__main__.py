from ringmoe_client.cli import main

raise SystemExit(main())
