def run(value):
    name = value["name"]
    if not name:
        raise ValueError("name is empty")
    return {"greeting": f"Hello, {name}!"}
