"""The median of a list. A bug makes it loop forever on an empty list: more time does not help."""

import json
import sys

numbers = sorted(json.load(sys.stdin)["numbers"])
lo, hi = 0, len(numbers) - 1
while lo < hi or not numbers:  # never ends for []
    lo, hi = lo + 1, hi - 1
middle = numbers[lo - 1 : hi + 2] if lo > hi else [numbers[lo]]
json.dump({"median": sum(middle) / len(middle) if len(middle) > 1 else middle[0]}, sys.stdout)
