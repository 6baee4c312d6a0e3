"""Entry point of a summary worker process (``python -m ctxledger.actors._summary_main``).

Kept apart from :mod:`ctxledger.actors.summary_process`, which the package imports: running
that module itself with ``-m`` would import it twice.
"""

from ctxledger.actors.summary_process import main

if __name__ == "__main__":
    main()
