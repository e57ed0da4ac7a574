"""Loading a model: GGUF, Hugging Face safetensors and hub, synthetic shapes, tokenizers, the device."""
