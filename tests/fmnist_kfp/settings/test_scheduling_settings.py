"""How the jobs are scheduled: the labels Kueue reads, the gang scheduler's name, and the
settings that only mean something beside another (each refused naming the fix)."""

from __future__ import annotations

from fmnist_kfp.settings.scheduling import (
    DEFAULT_SCHEDULER_NAMES,
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    SchedulingSettings,
)


def test_kueue_reads_the_queue_and_priority_only_with_a_queue():
    assert SchedulingSettings(priority_class="high").job_labels() == {}
    assert SchedulingSettings(queue="team-a", priority_class="high").job_labels() == {
        KUEUE_QUEUE_LABEL: "team-a", KUEUE_PRIORITY_LABEL: "high"}
    assert not SchedulingSettings().any and SchedulingSettings(gang="volcano").any


def test_the_pods_scheduler_is_the_gangs_own_or_the_default():
    assert SchedulingSettings().scheduler_name == ""
    for gang, name in DEFAULT_SCHEDULER_NAMES.items():
        assert SchedulingSettings(gang=gang).scheduler_name == name
    assert SchedulingSettings(gang="volcano", gang_scheduler_name="mine").scheduler_name == "mine"
    assert SchedulingSettings(start_deadline_minutes=2).start_deadline_seconds == 120.0


def test_a_setting_without_the_one_it_belongs_to_is_refused_naming_the_fix():
    problems = SchedulingSettings(gang_queue="q", gang_scheduler_name="s",
                                  gang_timeout_seconds=30).cross_problems()
    assert len(problems) == 3
    assert problems[0].startswith("gang_queue names a Volcano queue, but gang is not `volcano`")
    assert SchedulingSettings(gang="volcano", gang_queue="q").cross_problems() == []
