"""Sections of the dashboard's pages (each a function that draws one part of a page)."""
