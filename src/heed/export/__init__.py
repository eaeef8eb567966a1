"""Exported models: ONNX graphs (onnx.py) and an onnxruntime model behind the search (ort.py)."""
