"""LangGraph's assistants routes (DESIGN §17)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
