from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import UserCreationForm

__all__ = ["SignupForm", "TokenForm"]


class SignupForm(UserCreationForm):
    email = forms.EmailField(required=True, help_text="for password resets and 'your submission is scored' e-mails")

    class Meta(UserCreationForm.Meta):
        model = get_user_model()
        fields = ("username", "email")

    def clean_email(self) -> str:
        email = self.cleaned_data["email"].strip()
        if get_user_model().objects.filter(email__iexact=email).exists():
            raise forms.ValidationError("an account with this e-mail exists; sign in or reset its password")
        return email


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, required=False, help_text="what the token is for, e.g. 'CI' or 'laptop'")
