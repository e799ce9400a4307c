"""`make bench`: the performance claims of volumetool, measured (run as `python -m bench.run`)."""
