"""Count primes below n (a sieve), after a simulated service delay of n / 40,000 seconds."""

import json
import sys
import time

value = json.load(sys.stdin)
n = value.get("n")
if not isinstance(n, int) or isinstance(n, bool) or n < 0:
    print(f"n must be a non-negative integer, got {n!r}", file=sys.stderr)
    sys.exit(65)
time.sleep(min(5.0, n / 40_000))
sieve = bytearray([1]) * max(n, 2)
sieve[0:2] = b"\x00\x00"
for i in range(2, int(n**0.5) + 1):
    if sieve[i]:
        sieve[i * i :: i] = bytearray(len(sieve[i * i :: i]))
json.dump({"n": n, "primes": sum(sieve[:n]) if n > 1 else 0}, sys.stdout)
