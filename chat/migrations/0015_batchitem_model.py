from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0014_models"),
    ]

    operations = [
        migrations.AddField(
            model_name="batchitem",
            name="model",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
    ]
