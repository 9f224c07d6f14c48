"""Greeting function: plain Python, no tensor framework."""

import json


def handler(request: dict) -> dict:
    name = request.get("name", "world")
    return {"status": 200, "body": json.dumps({"greeting": f"hello, {name}"})}
