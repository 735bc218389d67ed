from django.db import migrations, models


def paper_covered_fill(apps, schema_editor):
    """Each stored evaluation's per-paper coverage, from its results (as aggregates counts it)."""
    Evaluation = apps.get_model("leaderboard", "Evaluation")
    Snippet = apps.get_model("leaderboard", "Snippet")
    SnippetResult = apps.get_model("leaderboard", "SnippetResult")
    papers_of: dict[int, dict[int, str]] = {}
    for ev in Evaluation.objects.only("id", "release_id").iterator():
        if ev.release_id not in papers_of:
            papers_of[ev.release_id] = dict(
                Snippet.objects.filter(release_id=ev.release_id).values_list("id", "paper__paper_id"))
        snippet_paper = papers_of[ev.release_id]
        predicted: dict[int, int] = {}
        samples = set()
        for snippet_id, sample, category in SnippetResult.objects.filter(evaluation_id=ev.id).values_list(
                "snippet_id", "sample", "category"):
            samples.add(sample)
            if category != "missing":
                predicted[snippet_id] = predicted.get(snippet_id, 0) + 1
        n = len(samples) or 1
        covered = {p: 0 for p in snippet_paper.values()}
        for snippet_id, count in predicted.items():
            if count == n and snippet_id in snippet_paper:
                covered[snippet_paper[snippet_id]] += 1
        Evaluation.objects.filter(pk=ev.pk).update(paper_covered=covered)


class Migration(migrations.Migration):

    dependencies = [
        ('leaderboard', '0007_releasepaper_archive'),
    ]

    operations = [
        migrations.AddField(
            model_name='evaluation',
            name='paper_covered',
            field=models.JSONField(blank=True, default=dict, help_text='per paper: snippets with a prediction in every sample'),
        ),
        migrations.RunPython(paper_covered_fill, migrations.RunPython.noop),
    ]
