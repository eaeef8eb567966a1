"""The translation server and its attention explorer (`heed serve`; needs `pip install 'heed-nmt[serve]'`).

heed.serve.app: the FastAPI app and its routes; heed.serve.batcher: dynamic batching across
requests; heed.serve.costs: what a request will cost (work, attention weights, the answer's
numbers), counted before it runs; heed.serve.schemas: the JSON shapes; heed.serve.settings: the limits (ServeSettings) and
ApiError, which app and compat/ share; heed.serve.slow_clients:
a read deadline per request; static/: the explorer page.
"""
