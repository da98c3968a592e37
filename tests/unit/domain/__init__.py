"""Table-driven tests of the pure scheduling core (spotline.domain)."""
