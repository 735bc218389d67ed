"""The domain: papers, snippets, releases, models and their evaluations. Aggregates are stored on write.

These models were the leaderboard app's; they moved here by state-only migrations
(catalog/0001_initial, leaderboard/0010_models_to_catalog), so each keeps its table
(``db_table``: ``leaderboard_*``), its rows and its ids.
"""
from __future__ import annotations

from django.db import models


class Paper(models.Model):
    paper_id = models.CharField(max_length=100, unique=True, help_text="folder name in the problem set, e.g. DyT")
    title = models.CharField(max_length=500)
    venue = models.CharField(max_length=100, blank=True)
    arxiv_abs = models.URLField(max_length=500, blank=True)
    arxiv_date = models.DateField(null=True, blank=True)
    arxiv_v1_date = models.DateField(null=True, blank=True)
    github_url = models.URLField(max_length=500, blank=True)
    first_commit_date = models.DateField(null=True, blank=True, db_index=True)
    last_commit_date = models.DateField(null=True, blank=True)
    summary = models.TextField(blank=True, help_text="Markdown; rendered sanitized")
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "leaderboard_paper"
        ordering = ["paper_id"]

    def __str__(self) -> str:
        return self.paper_id


class Release(models.Model):
    DRAFT, PUBLISHED = "draft", "published"
    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    status = models.CharField(max_length=20, choices=[(DRAFT, "draft"), (PUBLISHED, "published")], default=DRAFT)
    content_hash = models.CharField(max_length=64, blank=True)
    description = models.TextField(blank=True)
    published_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    is_default = models.BooleanField(default=False, help_text="shown when no release is asked for")
    release_date = models.DateField(null=True, blank=True, help_text="the date the release stands for (citations)")
    # bumped by every write that changes what the release's pages show: cache keys include it
    data_version = models.PositiveIntegerField(default=0)
    # significance tiers per view, {"with_paper": {model_key: tier}, ...}: computed on write
    tiers = models.JSONField(default=dict, blank=True)
    # the release this one succeeds (a draft starts from it; its figures are shown beside ours)
    predecessor = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="successors")
    # public changelog: [{"at", "kind": "retired"|"added"|..., "paper", "snippet", "reason"}]
    changelog = models.JSONField(default=list, blank=True)
    # held out: its tasks, reference code and paper files are served to staff only, uploads of predictions
    # are refused, only evaluations run here are scored; made public later by staff, never the other way
    held_out = models.BooleanField(default=False, help_text="tasks and code served to staff only")

    class Meta:
        db_table = "leaderboard_release"
        ordering = ["-published_at", "-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def frozen(self) -> bool:
        return self.status == self.PUBLISHED


class ReleasePaper(models.Model):
    """A paper as it is in one release: where its files are and their hash."""

    release = models.ForeignKey(Release, on_delete=models.CASCADE, related_name="release_papers")
    paper = models.ForeignKey(Paper, on_delete=models.PROTECT, related_name="release_papers")
    folder = models.CharField(max_length=500, blank=True, help_text="paper folder on the workers; empty: no code")
    content_hash = models.CharField(max_length=64, blank=True)
    # sha256 of the paper version's zip in the "papers" storage (scoring.paper_store): what a worker fetches
    archive = models.CharField(max_length=64, blank=True, help_text="paper files by content hash; empty: only at folder")
    snippet_count = models.PositiveIntegerField(default=0)
    total_weight = models.PositiveIntegerField(default=0)
    deterministic = models.BooleanField(default=False, help_text="repeated reference runs agreed")
    # the paper's papers.yaml entry as its folder was loaded (annotated files, timeout, environment, ...):
    # every copy of the folder is written beside it, so no copy rediscovers or forgets it
    entry = models.JSONField(default=dict, blank=True)
    # the health of the paper's environment, as the last scoring job saw it (staff's environments page)
    environment = models.CharField(max_length=100, blank=True, help_text="environment name; empty: inferred")
    environment_ok = models.BooleanField(null=True, blank=True, help_text="reference code passed; None: not checked")
    environment_error = models.TextField(blank=True)
    reference_seconds = models.FloatField(null=True, blank=True)
    environment_checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "leaderboard_releasepaper"
        unique_together = [("release", "paper")]
        ordering = ["paper__paper_id"]


class Snippet(models.Model):
    release = models.ForeignKey(Release, on_delete=models.CASCADE, related_name="snippets")
    paper = models.ForeignKey(Paper, on_delete=models.PROTECT, related_name="snippets")
    file = models.CharField(max_length=300, blank=True)
    name = models.CharField(max_length=300)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    depth = models.PositiveSmallIntegerField(default=0)
    position = models.PositiveIntegerField(default=0)
    start_line = models.PositiveIntegerField(null=True, blank=True)
    end_line = models.PositiveIntegerField(null=True, blank=True)
    weight = models.PositiveIntegerField()
    code = models.TextField(blank=True)

    class Meta:
        db_table = "leaderboard_snippet"
        unique_together = [("release", "paper", "file", "name")]
        ordering = ["paper__paper_id", "position"]

    def __str__(self) -> str:
        return f"{self.paper.paper_id}/{self.name}"


class LLMModel(models.Model):
    REFERENCE, EMPTY = "reference", "empty"
    key = models.CharField(max_length=200, unique=True)
    display_name = models.CharField(max_length=200)
    organisation = models.CharField(max_length=200, blank=True)
    developer = models.CharField(max_length=200, blank=True)
    open_weights = models.BooleanField(default=False)
    knowledge_cutoff = models.CharField(max_length=20, blank=True, help_text="as given: YYYY-MM or YYYY-MM-DD")
    knowledge_cutoff_date = models.DateField(null=True, blank=True, help_text="last day the cutoff covers")
    input_cost = models.FloatField(null=True, blank=True, help_text="USD per million input tokens")
    output_cost = models.FloatField(null=True, blank=True, help_text="USD per million output tokens")
    links = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True, help_text="provider configuration as imported")
    baseline = models.CharField(max_length=20, blank=True, choices=[("", "no"), (REFERENCE, "reference"), (EMPTY, "empty")])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "leaderboard_llmmodel"
        ordering = ["display_name"]

    def __str__(self) -> str:
        return self.display_name


class Evaluation(models.Model):
    PUBLISHED, SUBMISSION, BASELINE, DEMO = "published", "submission", "baseline", "demo"
    model = models.ForeignKey(LLMModel, on_delete=models.CASCADE, related_name="evaluations")
    release = models.ForeignKey(Release, on_delete=models.CASCADE, related_name="evaluations")
    with_paper = models.BooleanField(default=True)
    samples = models.PositiveIntegerField(default=1)
    decoding = models.JSONField(default=dict, blank=True, help_text="temperature, top_p, max_tokens, ...")
    prompt_version = models.CharField(max_length=50, blank=True)
    harness_version = models.CharField(max_length=50, blank=True)
    source = models.CharField(max_length=20, default=SUBMISSION)
    is_public = models.BooleanField(default=False)
    hidden = models.BooleanField(default=False, help_text="hidden by an admin")
    verified = models.BooleanField(default=False, help_text="reproduced by the maintainers")
    # results the engine flagged (tampering, suspicious code): such an evaluation is not ranked
    # until a reviewer clears it; a clearing covers the flags counted when it was made
    flagged_results = models.PositiveIntegerField(default=0, help_text="results with engine flags")
    flags_cleared_at = models.DateTimeField(null=True, blank=True, help_text="a reviewer cleared the flags")
    flags_cleared_by = models.CharField(max_length=150, blank=True)
    input_hash = models.CharField(max_length=64, blank=True, help_text="hash of what was scored (re-imports skip it)")
    # what `generate` recorded of the run (benchmark_core.generate.card_public): decoding, tokens, cost, ...
    run_card = models.JSONField(default=dict, blank=True)
    cost_per_snippet = models.FloatField(null=True, blank=True, help_text="USD per snippet, measured (run card)")
    run_date = models.DateField(null=True, blank=True, help_text="day of the run the results come from (imports)")
    # how it came to this release from the predecessor's: {"mode": "rescored"|"carried", "from_evaluation",
    # "from_release", "carried", "not_carried"}; empty for a result scored here first
    succession = models.JSONField(default=dict, blank=True)
    # the Hub itself asked the model's endpoint for the answers (submissions.runs): set by that path only,
    # never by an upload, an import or an admin form (not editable)
    run_here = models.BooleanField(default=False, editable=False, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    # aggregates, recomputed by aggregates.evaluation_aggregates_refresh when results are written
    scaled_pass_rate = models.FloatField(null=True, blank=True, db_index=True)
    pass_rate = models.FloatField(null=True, blank=True)
    scaled_ci_low = models.FloatField(null=True, blank=True)
    scaled_ci_high = models.FloatField(null=True, blank=True)
    scaled_std = models.FloatField(null=True, blank=True)
    pass_std = models.FloatField(null=True, blank=True)
    snippets_total = models.PositiveIntegerField(default=0)
    snippets_covered = models.PositiveIntegerField(default=0)
    categories = models.JSONField(default=dict, blank=True)
    per_paper = models.JSONField(default=dict, blank=True)
    paper_totals = models.JSONField(default=dict, blank=True, help_text="per paper [passed weight, weight, passed, n]")
    # what a scorable subset ranks on: a row is complete on some papers when it covers each of them
    paper_covered = models.JSONField(default=dict, blank=True,
                                     help_text="per paper: snippets with a prediction in every sample")
    pass_at_k = models.JSONField(default=dict, blank=True)
    computed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "leaderboard_evaluation"
        ordering = ["-scaled_pass_rate"]
        indexes = [models.Index(fields=["release", "is_public", "hidden"], name="leaderboard_release_9ca384_idx")]

    def __str__(self) -> str:
        return f"{self.model} on {self.release}"

    @property
    def complete(self) -> bool:
        return self.snippets_total > 0 and self.snippets_covered >= self.snippets_total


#: the category of an imported failure: the published results hold verdicts only (no test output)
IMPORTED_FAILURE = "unknown"
#: how pages name stored categories that are not the engine's own words
CATEGORY_LABELS = {IMPORTED_FAILURE: "not published"}
#: said once wherever imported verdicts are shown without their completions
IMPORTED_NOTE = ("Results imported from the published release hold the verdict of each snippet (pass or fail, exit "
                 "code) only: the published results do not include the completions, the test output or the error "
                 "category, so these verdicts have no drill-down.")


class SnippetResult(models.Model):
    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="results")
    snippet = models.ForeignKey(Snippet, on_delete=models.CASCADE, related_name="results")
    sample = models.PositiveIntegerField(default=0)
    passed = models.BooleanField()
    category = models.CharField(max_length=20, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    seconds = models.FloatField(null=True, blank=True)
    output_tail = models.TextField(blank=True)
    completion = models.TextField(blank=True)
    flags = models.JSONField(default=list, blank=True, help_text="the engine's flags, e.g. 'tampering:os.exec'")

    class Meta:
        db_table = "leaderboard_snippetresult"
        constraints = [
            models.UniqueConstraint(fields=["evaluation", "snippet", "sample"], name="one_result_per_snippet_sample")
        ]

