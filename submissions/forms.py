"""The upload form: model metadata, settings, release and the predictions file.

``SubmissionMetaForm`` holds every metadata field with its limits; the web form adds the release
and the file, and the API validates its query-string or multipart fields with the same class, so
both refuse the same input with the same messages.
"""
from __future__ import annotations

from django import forms

from benchmark_core.generate import CARD_MAX_BYTES, RunCardError, card_parse

from .selectors import releases_open

__all__ = ["SubmissionMetaForm", "SubmissionForm", "RunForm"]


class SubmissionMetaForm(forms.Form):
    model_name = forms.CharField(max_length=200, label="Model name", help_text="as it should appear on the leaderboard")
    organisation = forms.CharField(max_length=200, required=False)
    open_weights = forms.BooleanField(required=False, label="Open weights")
    knowledge_cutoff = forms.CharField(
        max_length=20, required=False, help_text="YYYY, YYYY-MM or YYYY-MM-DD; used by the contamination-safe view"
    )
    link = forms.URLField(max_length=500, required=False, assume_scheme="https", help_text="model card or paper")
    without_paper = forms.BooleanField(required=False, label="Prompts without the paper text (ablation)")
    # FloatField refuses nan and inf
    temperature = forms.FloatField(required=False, min_value=0)
    top_p = forms.FloatField(required=False, min_value=0, max_value=1)
    max_tokens = forms.IntegerField(required=False, min_value=1, max_value=1_000_000_000)
    notes = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False, max_length=5000)

    def decoding(self) -> dict:
        data = self.cleaned_data
        return {k: data[k] for k in ("temperature", "top_p", "max_tokens") if data.get(k) is not None}


class SubmissionForm(SubmissionMetaForm):
    release = forms.ModelChoiceField(queryset=releases_open(), empty_label=None)
    file = forms.FileField(
        label="Predictions (JSON lines)",
        help_text='one object per line: {"paper", "snippet", "completion"} and optional "file", "sample"; '
                  'instead of "completion", the whole edited masked file ("file_content") or a unified diff '
                  'against it ("patch")',
    )

    run_card = forms.FileField(
        required=False, label="Run card (optional)",
        help_text="the NAME.card.json that `python -m benchmark_core generate` wrote beside NAME.jsonl: its "
                  "decoding, tokens and cost are shown with the results",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["release"].queryset = releases_open()  # evaluated per request, not at import

    def clean_run_card(self) -> dict | None:
        upload = self.cleaned_data.get("run_card")
        if not upload:
            return None
        try:
            return card_parse(upload.read(CARD_MAX_BYTES + 1))  # more than the limit is refused unread
        except RunCardError as exc:
            raise forms.ValidationError(str(exc)) from None

    def decoding(self) -> dict:
        """The fields given win; the run card fills the ones left empty."""
        recorded = (self.cleaned_data.get("run_card") or {}).get("decoding") or {}
        card = {k: v for k, v in recorded.items() if k in ("temperature", "top_p", "max_tokens")}
        return {**card, **super().decoding()}


class RunForm(forms.Form):
    """An evaluation run here: the model's endpoint, its decoding, the release (``submissions.runs`` checks the rest)."""

    release = forms.ModelChoiceField(queryset=releases_open(runs=True), empty_label=None)
    model_name = forms.CharField(max_length=200, label="Model name", help_text="as it should appear on the leaderboard")
    base_url = forms.CharField(max_length=500, label="Endpoint (base URL)",
                               help_text="an OpenAI-compatible API, e.g. https://api.example.com/v1")
    model = forms.CharField(max_length=200, label="Model id", help_text="the model as the endpoint knows it")
    api_key = forms.CharField(max_length=1000, required=False, label="API key (optional)",
                              widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
                              help_text="used for this evaluation only, kept encrypted until its answers are in, "
                                        "then deleted; never shown again")
    temperature = forms.FloatField(required=False, min_value=0, max_value=2)
    top_p = forms.FloatField(required=False, min_value=0, max_value=1)
    max_tokens = forms.IntegerField(required=False, min_value=1, max_value=1_000_000)
    seed = forms.IntegerField(required=False)
    samples = forms.IntegerField(initial=1, min_value=1, max_value=20)
    without_paper = forms.BooleanField(required=False, label="Prompts without the paper text (ablation)")
    price_in = forms.FloatField(required=False, min_value=0, label="USD per million input tokens (for the cost)")
    price_out = forms.FloatField(required=False, min_value=0, label="USD per million output tokens")
    max_cost_usd = forms.FloatField(required=False, min_value=0, label="Cost cap (USD)")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["release"].queryset = releases_open(runs=True)  # evaluated per request, not at import
