"""Backline compiler: xDSL dialects and passes that lower a placement to native code."""
