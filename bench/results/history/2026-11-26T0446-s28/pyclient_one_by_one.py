"""bench.pyclient with single appends handed to the writer one at a time (as before the runs)."""
import sys
from bkspark.client.bookkeeper import LedgerHandle
def one_by_one(self, singles, callbacks):
    for d, c in zip(singles, callbacks):
        self._writer.append(d, c)
LedgerHandle._hand_over_singles = one_by_one
from bench import pyclient
sys.exit(pyclient.main(sys.argv[1:]))
