from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0002_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="chatsession",
            name="external_user",
            field=models.CharField(blank=True, max_length=256),
        ),
    ]
