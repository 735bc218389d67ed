"""manage.py generate_synthetic: the thin command over bench/synthetic.py (bench/web_load uses it)."""
import pytest
from django.core.management import call_command
from catalog.models import Evaluation, Release

@pytest.mark.django_db
def test_generate_synthetic_command():
    """A small synthetic release with stored aggregates for every model."""
    call_command("generate_synthetic", "--models", "3", "--snippets", "20", "--samples", "2", "--papers", "4")
    release = Release.objects.get(name="synthetic")
    assert Evaluation.objects.filter(release=release).count() == 3
    assert all(ev.scaled_pass_rate is not None for ev in Evaluation.objects.filter(release=release))
