def run(payload):
    raise RuntimeError("moon_a is broken: ephemeris table missing")
