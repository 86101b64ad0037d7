"""A business row that commits, or not, with the task enqueued beside it."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    number: models.IntegerField[int, int] = models.IntegerField()
