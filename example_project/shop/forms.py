from __future__ import annotations

from decimal import Decimal

from django import forms

from shop.models import Store


class OrderForm(forms.Form):
    store = forms.ModelChoiceField(queryset=Store.objects.order_by("name"))
    customer_email = forms.EmailField(initial="ada@example.com")
    total = forms.DecimalField(
        min_value=Decimal("0.01"), max_digits=10, decimal_places=2, initial=Decimal("42.00")
    )
