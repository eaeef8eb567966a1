"""The translation server and its attention explorer (`heed serve`; needs `pip install 'heed-nmt[serve]'`).

heed.serve.app: the FastAPI app and its routes; heed.serve.batcher: dynamic batching across
requests; heed.serve.schemas: the JSON shapes; static/: the explorer page.
"""
