"""The `mopt` command line: one module per subcommand, registered in main.py."""
