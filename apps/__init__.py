"""incastlab: apps — programs that run inside emulated hosts (see apps/README.md).

c10d logs every failed store connection or gloo timeout as a multi-line C++ error dump
on stderr; the apps report each failure as one clear line themselves, so torch's C++
log level defaults to FATAL here (set TORCH_CPP_LOG_LEVEL=INFO to debug). This must
happen before torch is imported, hence in the package's __init__.
"""
import os

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
