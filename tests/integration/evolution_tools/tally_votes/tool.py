def run(value):
    raise RuntimeError("the ballot box is broken")  # a crash on every input: only a rewrite could fix it
