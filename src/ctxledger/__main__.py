"""``python -m ctxledger``: the same as the ``ctxledger`` command."""

from ctxledger.cli import main

if __name__ == "__main__":
    main(prog_name="ctxledger")
