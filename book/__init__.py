"""The companion as a website (``make book``): book/build.py stages the committed notebooks, book/conf.py is
Sphinx's configuration, book/text.py what the book itself says in each language. docs/book.md says more."""
