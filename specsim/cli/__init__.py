"""The command line: typer commands that parse arguments, call one library function each and print what it returns."""
