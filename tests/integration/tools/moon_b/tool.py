def run(payload):
    raise RuntimeError("moon_b is broken: ephemeris table missing")
