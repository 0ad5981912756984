from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="usagerecord",
            name="ttft_ms",
            field=models.PositiveIntegerField(
                blank=True, null=True, verbose_name="time to first token (ms)"
            ),
        ),
        migrations.AddField(
            model_name="usagerecord",
            name="reason",
            field=models.CharField(blank=True, db_index=True, max_length=32),
        ),
    ]
