def run(value):
    return {"preview": value["key"]}
