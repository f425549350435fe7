"""`tmin explore`: a local web page for attention (section 3.2, eq. (1)), a trained model's attention and its
training curves. The server is the standard library's; the page is one HTML file with its own inline JS and
CSS (package data under `assets/`), so `tmin explore --static` can write it out with no network needed.

Modules: `tensors` (matrices as page data), `equation` (eq. (1) step by step), `session` (the model and its
vocabulary), `attention` (a sentence's translation and attention), `training` (metrics.jsonl and eq. (3)),
`page` (the HTML and the precomputed data of the static file), `server` (the JSON endpoints).
"""
