def run(value):
    return {"greeting": f"Good day, {value['person']}."}
