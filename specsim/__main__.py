"""`python -m specsim` runs the command line (same as the `specsim` console script)."""

from specsim.cli.launch import main

if __name__ == "__main__":
    main()
