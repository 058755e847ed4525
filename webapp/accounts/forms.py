from __future__ import annotations

from django import forms
from django.contrib.auth.forms import UserCreationForm


class SignupForm(UserCreationForm):
    email = forms.EmailField(required=False, help_text="Optional. Only used if you forget your password.")

    class Meta(UserCreationForm.Meta):
        fields = ("username", "email")
