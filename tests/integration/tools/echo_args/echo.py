import json
import sys

json.load(sys.stdin)
print(json.dumps({"argv": sys.argv[1:]}))
