"""Forms of the contributions app: metadata + zip, revision, review decision."""
from __future__ import annotations

import re
from pathlib import PurePosixPath

from django import forms
from django.conf import settings

from .models import PAPER_ID_VALIDATOR, Review
from .selectors import paper_id_taken
from .services import ContributionData

_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _plain(text: str) -> str:
    """Plain text as typed, minus control characters (templates escape it on output)."""
    return _CONTROL_RE.sub("", text or "").strip()


def _paths(text: str, label: str) -> tuple[str, ...]:
    paths = []
    for raw in re.split(r"[\n,]", text or ""):
        rel = raw.strip().replace("\\", "/")
        if not rel:
            continue
        parts = PurePosixPath(rel).parts
        if rel.startswith("/") or ".." in parts or _CONTROL_RE.search(rel):
            raise forms.ValidationError(f"{label}: {rel!r} must be a path inside the paper folder")
        paths.append(rel.removeprefix("./"))
    return tuple(dict.fromkeys(paths))


class ContributionForm(forms.Form):
    paper_id = forms.CharField(max_length=100, validators=[PAPER_ID_VALIDATOR], label="Paper id",
                               help_text="Becomes the folder name, e.g. focal-loss.")
    title = forms.CharField(max_length=500)
    venue = forms.CharField(max_length=100, required=False, help_text="e.g. ICLR2025")
    arxiv_url = forms.URLField(max_length=500, required=False, label="arXiv link", assume_scheme="https")
    code_url = forms.URLField(max_length=500, required=False, label="Code repository link", assume_scheme="https")
    first_commit_date = forms.DateField(required=False, help_text="YYYY-MM-DD: the repository's first commit",
                                        widget=forms.DateInput(attrs={"type": "date"}))
    annotated_files = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}),
                                      help_text="One path per line; empty: every .py file with paper2code tags.")
    context_files = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}),
                                    help_text="One path per line: files shown to the model as context.")
    requirements = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}),
                                   help_text="pip requirement lines (names from PyPI); empty: the folder's "
                                             "paper2code_requirements.txt, if any.")
    archive = forms.FileField(label="Zip of the paper folder",
                              help_text="The folder with paper2code_test.py, the annotated files and the paper text.")

    def __init__(self, *args, contribution=None, **kwargs):
        self.contribution = contribution
        super().__init__(*args, **kwargs)
        self.fields["archive"].help_text += f" At most {settings.RCB_CONTRIB_MAX_UPLOAD_MB} MB."
        self.fields["archive"].widget.attrs["accept"] = ".zip,application/zip"

    def clean_paper_id(self) -> str:
        value = self.cleaned_data["paper_id"].strip()
        if self.contribution is None or value != self.contribution.paper_id:
            reason = paper_id_taken(paper_id=value, exclude_pk=self.contribution.pk if self.contribution else None)
            if reason:
                raise forms.ValidationError(f"{reason}; choose another id")
        return value

    def clean_title(self) -> str:
        value = _plain(self.cleaned_data["title"])
        if not value:
            raise forms.ValidationError("give the paper's title")
        return value

    def clean_venue(self) -> str:
        return _plain(self.cleaned_data["venue"])

    def clean_annotated_files(self) -> tuple[str, ...]:
        return _paths(self.cleaned_data["annotated_files"], "annotated files")

    def clean_context_files(self) -> tuple[str, ...]:
        return _paths(self.cleaned_data["context_files"], "context files")

    def clean_requirements(self) -> tuple[str, ...]:
        from .checks import requirements_parse

        lines = [_plain(line) for line in (self.cleaned_data["requirements"] or "").splitlines()]
        good, problems = requirements_parse(lines)
        if problems:
            raise forms.ValidationError(problems)
        return tuple(good)

    def clean_archive(self):
        archive = self.cleaned_data["archive"]
        if archive.size > settings.RCB_CONTRIB_MAX_UPLOAD_MB * 1024 * 1024:
            raise forms.ValidationError(f"the zip is larger than {settings.RCB_CONTRIB_MAX_UPLOAD_MB} MB")
        return archive

    def data_object(self) -> ContributionData:
        d = self.cleaned_data
        return ContributionData(
            paper_id=d["paper_id"], title=d["title"], venue=d["venue"], arxiv_url=d["arxiv_url"], code_url=d["code_url"],
            first_commit_date=d["first_commit_date"], annotated_files=d["annotated_files"], context_files=d["context_files"],
            requirements=d["requirements"],
        )

    @classmethod
    def initial_for(cls, contribution) -> dict:
        return {
            "paper_id": contribution.paper_id, "title": contribution.title, "venue": contribution.venue,
            "arxiv_url": contribution.arxiv_url, "code_url": contribution.code_url,
            "first_commit_date": contribution.first_commit_date,
            "annotated_files": "\n".join(contribution.annotated_files),
            "context_files": "\n".join(contribution.context_files),
            "requirements": "\n".join(contribution.requirements),
        }


class ReviewForm(forms.Form):
    decision = forms.ChoiceField(choices=Review.DECISIONS, widget=forms.RadioSelect)
    comment = forms.CharField(required=False, max_length=10_000, widget=forms.Textarea(attrs={"rows": 5}),
                              help_text="Shown to the contributor. Required to reject or request changes.")

    def clean_comment(self) -> str:
        return _plain(self.cleaned_data["comment"])

    def clean(self):
        data = super().clean()
        if data.get("decision") in (Review.REJECT, Review.REQUEST_CHANGES) and not data.get("comment"):
            self.add_error("comment", "say what has to change (or why it is rejected)")
        return data


class PublishForm(forms.Form):
    confirm = forms.BooleanField(label="Freeze this release: no paper can be added or changed afterwards")
    make_default = forms.BooleanField(required=False, label="Show it by default on the leaderboard")
    accept_fewer = forms.BooleanField(
        required=False, label="Show it by default even though it ranks fewer models for now",
        help_text="the predecessor's results are re-scored onto it after publishing; until then fewer models are ranked",
    )


class ReleaseNameForm(forms.Form):
    name = forms.CharField(max_length=100, label="Name", help_text="as cited, e.g. v1.1; the permalink (slug) stays")

    def clean_name(self) -> str:
        return " ".join(_plain(self.cleaned_data["name"]).split())


class ErrataForm(forms.Form):
    retire = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}), label="Snippets to retire",
        help_text="one PAPER/SNIPPET per line, e.g. rope/attention scores (snippets nested in it go too)",
    )
    reason = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}),
                             help_text="public, on the new release's changelog")
    name = forms.CharField(max_length=100, required=False, help_text="of the new release; default '<name> (errata N)'")
    confirm = forms.BooleanField(label="Publish the successor now and re-score every public result onto it")

    def clean_retire(self) -> list[str]:
        lines = [_plain(line) for line in self.cleaned_data["retire"].splitlines()]
        return [line for line in lines if line]

    def clean_reason(self) -> str:
        return _plain(self.cleaned_data["reason"])
