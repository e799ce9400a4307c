"""`report`: one self-contained HTML page about one or more volumes, for people to look at.

`gather` reads a volume (SQL, and pure functions that shape its rows); `charts` draws figures
as inline SVG; `page` lays out the document. Rendering is pure: the same figures give the same
bytes, and nothing in the page reaches the network.
"""
