"""The reproduction campaign (``python benchmarks/campaign --help``)."""
