"""Full-text search of a volume (SPEC section 11): the query (`query`), the index volumetool
keeps in the file (`index`), and the search itself (`find`)."""
