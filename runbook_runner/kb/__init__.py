"""The knowledge base: the site's generated pages, its figures, postmortems from runs."""
