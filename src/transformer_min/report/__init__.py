"""`tmin report`: the paper checked claim by claim, with tables, figures and their data (HTML + Markdown)."""
