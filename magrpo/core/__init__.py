"""The ground floor: what every layer reads and writes."""
