"""coa: the domain library of coa-pipeline."""
