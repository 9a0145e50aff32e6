"""Render a signed (or plain) qualification report for people: a self-contained HTML page (`html`) or a
Markdown summary (`markdown`), from an input read and checked by `source`.

Import the modules themselves; this `__init__` stays empty so that no module of the package imports it
back (a package whose `__init__` imports its own modules, which import the package, is an import cycle).
"""
