"""Step 6, inference: quantisation with its quality cost, the KV-cache budget, a real serving engine
with continuous batching (and its fallback), and a load benchmark against the SLO.

Contract: `run_inference(InferenceRequest) -> InferenceResult`, plain data in and out, so the same
call runs in the flow's process or as `python -m day0.steps.inference.job REQUEST_URL RESULT_URL` on a cluster.
Other steps reach this package only through `day0.steps.inference.result`.
"""
