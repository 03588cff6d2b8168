"""Write an integer (1..3999) in Roman numerals. It works; its description ("Utility.") does not
tell anyone so (a bad description)."""

NUMERALS = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
            (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


def run(value: dict) -> dict:
    number = value["number"]
    if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 4000:
        raise ValueError("number must be an integer from 1 to 3999")
    out = []
    for amount, numeral in NUMERALS:
        count, number = divmod(number, amount)
        out.append(numeral * count)
    return {"roman": "".join(out)}
