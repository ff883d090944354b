"""ECE V1 parameters get their JSON type: booleans and numbers by name, the rest stay text."""

from gold.ece_documents import typed_parameters


def test_parameters_get_their_json_types_and_text_that_is_no_number_stays_text():
    typed = typed_parameters({
        "nullable": "TRUE", "decommissionTime": "-1705442957005", "note": "42", "skipped": None,
    })  # fmt: skip
    assert typed == {"nullable": True, "decommissionTime": -1705442957005, "note": "42"}
    # '²' is a digit to str.isdigit() but no number to int(): the value stays as stored.
    assert typed_parameters({"decommissionTime": "\u00b2"}) == {"decommissionTime": "\u00b2"}
    assert typed_parameters({"decommissionTime": "12x"}) == {"decommissionTime": "12x"}
    assert typed_parameters(None) == {}
